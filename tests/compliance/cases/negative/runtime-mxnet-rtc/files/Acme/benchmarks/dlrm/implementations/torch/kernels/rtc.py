import mxnet as mx

SOURCE = open("kernels/emb.src").read()
module = mx.rtc.CudaModule(SOURCE)
