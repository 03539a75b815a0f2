"""Frontends: the Tensor API, nn layers, Frontend-IR JSON and ONNX, all building UOp graphs."""
