# training entry point
import sys
print(sys.argv)
