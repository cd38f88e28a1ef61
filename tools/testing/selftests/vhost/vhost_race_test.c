// SPDX-License-Identifier: GPL-2.0
/* Placeholder: being written. */
#include "../kselftest_harness.h"

TEST(placeholder)
{
	SKIP(return, "not written yet");
}

TEST_HARNESS_MAIN
