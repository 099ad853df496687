// Copyright rpcguard authors.
//
// Reading a private member of one of gRPC 1.51's classes by name: an
// explicit template instantiation may name it (access checking does not
// apply to the names in one), and the friend function it defines hands
// the pointer to the member out. A renamed member or a changed type is a
// compile error. Included only by this directory's .cc files, whose
// RPCGUARD_PRIVATE_MEMBER lines go in rpcguard::internal's unnamed
// namespace (an explicit instantiation must be in a namespace enclosing
// the template's), inside `#if RPCGUARD_GRPC_1_51`.

#ifndef RPCGUARD_INTERNAL_GRPC_1_51_PRIVATE_MEMBER_H_
#define RPCGUARD_INTERNAL_GRPC_1_51_PRIVATE_MEMBER_H_

namespace rpcguard {
namespace internal {
namespace {

// A pointer to a private member, handed out through a friend function that
// the explicit instantiation of Expose defines: `Tag` declares it, so
// argument-dependent lookup finds it as Get(Tag()).
template <typename Tag, typename Tag::type kMember>
struct Expose {
  friend typename Tag::type Get(Tag) { return kMember; }
};

}  // namespace
}  // namespace internal
}  // namespace rpcguard

// Declares TagName, through which Get(TagName()) is `&Class::member`, a
// `Type` member.
#define RPCGUARD_PRIVATE_MEMBER(TagName, Class, Type, member) \
  struct TagName {                                            \
    using type = Type Class::*;                               \
    friend type Get(TagName);                                 \
  };                                                          \
  template struct Expose<TagName, &Class::member>

#endif  // RPCGUARD_INTERNAL_GRPC_1_51_PRIVATE_MEMBER_H_
