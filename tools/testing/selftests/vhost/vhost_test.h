/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Glue between the kselftest harness and the vhost tests.  Include after
 * ../kselftest_harness.h.
 */
#ifndef VHOST_TEST_H
#define VHOST_TEST_H

/*
 * TEST_F whose body does not run when FIXTURE_SETUP skipped: 6.1's harness
 * runs the body after a SKIP() in setup.  The fixture sets self->skipped
 * before skipping.
 */
#define VHOST_TEST_F(fixture, name, timeout)				\
	static void fixture##_##name##_body(				\
		struct __test_metadata *_metadata,			\
		FIXTURE_DATA(fixture) *self,				\
		const FIXTURE_VARIANT(fixture) *variant);		\
	TEST_F_TIMEOUT(fixture, name, timeout)				\
	{								\
		if (!self->skipped)					\
			fixture##_##name##_body(_metadata, self, variant); \
	}								\
	static void fixture##_##name##_body(				\
		struct __test_metadata *_metadata,			\
		FIXTURE_DATA(fixture) *self,				\
		const FIXTURE_VARIANT(fixture) *variant)

/* Skip from FIXTURE_SETUP, saying why. */
#define VHOST_SKIP(fmt, ...) do {					\
		self->skipped = true;					\
		SKIP(return, fmt, ##__VA_ARGS__);			\
	} while (0)

#endif
