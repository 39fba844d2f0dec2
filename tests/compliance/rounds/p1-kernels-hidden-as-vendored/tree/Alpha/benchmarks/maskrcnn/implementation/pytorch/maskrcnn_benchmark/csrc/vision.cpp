// upstream file of real size: enough bytes to count as evidence of a copy of the project
#include <torch/extension.h>
