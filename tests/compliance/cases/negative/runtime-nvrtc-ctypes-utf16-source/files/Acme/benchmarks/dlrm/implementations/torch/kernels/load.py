import ctypes

LIB = ctypes.CDLL("libnvrtc.so.12")
SOURCE = open("kernels/source.txt", encoding="utf-16").read()
