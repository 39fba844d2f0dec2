// CUDA graph capture helpers for MXNet (host code).
#include <mxnet/c_api.h>
extern "C" int graph_capture_begin(void* stream) { return stream == nullptr ? -1 : 0; }
