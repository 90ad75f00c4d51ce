"""Ship a trained model: ONNX / torch.export files with metadata, int8 quantization, latency.

Shared API (other features build on these names): `onnx.export_onnx`, `onnx.read_metadata`,
`quantize.quantize_int8`, `verify.measure_latency`.
"""
