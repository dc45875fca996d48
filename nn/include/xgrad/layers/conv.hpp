#pragma once
// Kept so that existing includes compile: the layers live in xgrad/nn/ (namespace xgrad::nn).
#include "xgrad/nn/conv.hpp"
#include "xgrad/nn/linear.hpp"
