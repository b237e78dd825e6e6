"""Launcher for a checkout: `python cli.py ...` runs the same app as `autofusion`."""

from ruleengine.cli import main

if __name__ == "__main__":
    main()
