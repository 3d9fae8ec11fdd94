"""The after-sales shop the agent serves: its tools (orders, refunds, exchange proposals,
follow-ups) and the script that plays them in tests and the demo."""
