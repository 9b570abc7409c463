"""Exact MaxSim scoring: the torch scorer, fused CPU/GPU kernels, and which one runs."""
