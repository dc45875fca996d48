#pragma once
// The neural-network layers of xgrad (namespace xgrad::nn), built on the core ops.
#include "xgrad/layers/batch_norm.hpp"
#include "xgrad/layers/module.hpp"
