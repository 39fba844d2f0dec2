#pragma once
#define CAT(a, b) a##b
#define KQ CAT(__glo, bal__)
