import loadgen
