import mxnet
print("train")
