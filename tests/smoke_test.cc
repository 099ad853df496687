#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
TEST(Smoke, Builds) {
  rpcguard::testing::v1::FaultRequest r;
  r.set_op_id("x");
  auto ch = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  EXPECT_EQ(r.op_id(), "x");
}
