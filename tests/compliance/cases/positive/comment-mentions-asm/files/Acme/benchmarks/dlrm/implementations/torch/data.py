def load(path):
    return open(path).read()
