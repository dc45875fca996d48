#pragma once
// The layers with what trains them: xgrad::nn (xgrad/nn.hpp), xgrad::optim, xgrad::data and
// xgrad::io. xgrad::train (the training loop) and xgrad::distributed have umbrellas of their
// own, xgrad/train.hpp and xgrad/distributed.hpp.
#include "xgrad/data.hpp"
#include "xgrad/io.hpp"
#include "xgrad/nn.hpp"
#include "xgrad/optim.hpp"
