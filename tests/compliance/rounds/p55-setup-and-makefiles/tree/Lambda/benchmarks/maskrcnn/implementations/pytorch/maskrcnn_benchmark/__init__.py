# maskrcnn_benchmark
