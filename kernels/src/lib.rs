//! CUDA kernel sources embedded as text and a typed registry of their entry points.
