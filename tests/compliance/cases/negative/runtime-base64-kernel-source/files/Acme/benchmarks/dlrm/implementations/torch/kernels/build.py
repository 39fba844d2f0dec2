import base64
import json

from pynvrtc.compiler import Program

SOURCE = base64.b64decode(json.load(open("kernels/blob.json"))["emb"]).decode()
ptx = Program(SOURCE, "emb.cu").compile()
