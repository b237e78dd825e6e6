"""Graph loading: ONNX -> an immutable ``Graph`` view.

``loader`` runs the steps: ``binding`` (the user's dims and input shapes), ``typeread``
and ``propagate`` (declared and inferred types; ``segments`` infers a long graph in
parts), ``wiring`` (tensor ids, producers, consumers, node order), ``values`` (attribute
and constant values), ``typemerge`` (every tensor's merged type), ``folding`` (what a
compiler computes ahead); ``problems`` holds the AF5xx findings, ``model`` the records.
"""

from ruleengine.graph.loader import graph_from_model, load_graph
from ruleengine.graph.model import Graph, Node, Tensor

__all__ = ["Graph", "Node", "Tensor", "graph_from_model", "load_graph"]
