"""HTTP inference on an exported ONNX file: FastAPI + uvicorn + ONNX Runtime (see docs/deploy.md)."""
