"""autofusion: declarative YAML fusion rules for ONNX graphs.

Pipeline: load rules -> load graph -> match -> cost -> resolve -> rewrite/emit.
The Python API (mirroring the CLI) is re-exported here.
"""

__version__ = "0.1.0"
