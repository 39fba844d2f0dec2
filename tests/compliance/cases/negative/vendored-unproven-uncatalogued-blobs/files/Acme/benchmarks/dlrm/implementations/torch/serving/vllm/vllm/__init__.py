# the package of this copy; a file of real size so that it counts as evidence of a copy
__version__ = "0.0"
