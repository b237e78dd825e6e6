"""`python -m ruleengine` runs the same app as the `autofusion` console script."""

from ruleengine.cli import main

if __name__ == "__main__":
    main()
