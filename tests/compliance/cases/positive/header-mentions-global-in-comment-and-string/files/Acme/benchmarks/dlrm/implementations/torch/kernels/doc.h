#pragma once
// Every kernel here is __global__ and declared in kernel_manifest.yaml.
/* __attribute__((global)) is __global__ too */
static const char* kDoc = "__global__ void k(float*)";
static const char kQuote = '"';
