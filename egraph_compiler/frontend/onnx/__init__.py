"""ONNX import: one module per family of operators, `importer` walks the graph."""
