// Copyright rpcguard authors.
//
// RPCGUARD_SANITIZED: 1 when built under AddressSanitizer or
// ThreadSanitizer (gcc's and clang's spellings), else 0. Tests use it where
// a figure means nothing under a sanitizer (heap measured with mallinfo2,
// timing on a slowed process), never to skip a behaviour check.

#ifndef RPCGUARD_TESTS_TESTING_SANITIZERS_H_
#define RPCGUARD_TESTS_TESTING_SANITIZERS_H_

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RPCGUARD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RPCGUARD_SANITIZED 1
#endif
#endif
#ifndef RPCGUARD_SANITIZED
#define RPCGUARD_SANITIZED 0
#endif

#endif  // RPCGUARD_TESTS_TESTING_SANITIZERS_H_
