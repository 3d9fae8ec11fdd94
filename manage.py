#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentportal.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:
        # A setting the environment must give: one clear sentence, not a traceback.
        sys.exit(f"agentportal: {error}")


if __name__ == "__main__":
    main()
