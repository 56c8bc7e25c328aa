// All differentiable functions (the torch.nn.functional of qkv), the Tensor with its methods, and
// reverse mode.
#pragma once

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/activation.h"
#include "qkv/ops/additive_score.h"
#include "qkv/ops/adam.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/autocast.h"
#include "qkv/ops/backward.h"
#include "qkv/ops/compare.h"
#include "qkv/ops/embedding.h"
#include "qkv/ops/gradcheck.h"
#include "qkv/ops/index.h"
#include "qkv/ops/layer_norm.h"
#include "qkv/ops/loss.h"
#include "qkv/ops/mask.h"
#include "qkv/ops/rnn.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/softmax.h"
#include "qkv/ops/tensor.h"
#include "qkv/ops/view.h"
