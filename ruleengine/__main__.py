"""`python -m ruleengine` and the `autofusion` console script: the same app.

Ctrl-C and SIGTERM are held while the command line's modules load (~0.8 s): one that
arrives then is handled by ``main`` (exit 130/143, no traceback). ``import ruleengine``
itself is cheap (its API loads lazily), so nothing heavy runs before the hold.
"""

from ruleengine.runtime import hold_stop_signals


def run() -> None:
    """The console script's entry point."""
    hold_stop_signals()
    from ruleengine.cli import main

    main()


if __name__ == "__main__":
    run()
