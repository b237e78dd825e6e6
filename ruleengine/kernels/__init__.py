"""Kernel catalog: the kernels a target offers, bound to the groups the resolver chose."""
