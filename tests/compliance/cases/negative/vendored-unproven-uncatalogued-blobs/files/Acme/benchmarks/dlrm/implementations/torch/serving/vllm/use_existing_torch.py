# a file of real size so that it counts as evidence of a copy of the project
import sys
