// Public interface of the acme binding.
#pragma once
#include "detail/pool.h"
