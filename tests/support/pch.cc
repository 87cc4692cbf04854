// The source of lockd_test_pch: nothing but the precompiled header
// (tests/CMakeLists.txt, LOCKD_TEST_PCH).
