#pragma once
#include "emb_api.h"

struct EmbShape {
  int64_t dim;
  int64_t pooling;
};
