"""The package version, in a module of its own so that any layer may read it.

``ruleengine/__init__.py`` imports the pipeline lazily but is still the facade on top;
stages that stamp the version into their output (the SARIF report, the fused model's
metadata) take it from here rather than from the package root.
"""

__version__ = "0.1.0"
