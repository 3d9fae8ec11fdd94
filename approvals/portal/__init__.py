"""The portal's pages: the supervisor's inbox, a call's page and a plan's page, the
customer's chat, and the live streams that keep open pages current."""
