print("detect")
