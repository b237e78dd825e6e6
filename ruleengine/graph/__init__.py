"""Graph loading: ONNX -> an immutable ``Graph`` view (see ``loader``)."""

from ruleengine.graph.loader import graph_from_model, load_graph
from ruleengine.graph.model import Graph, Node, Tensor

__all__ = ["Graph", "Node", "Tensor", "graph_from_model", "load_graph"]
