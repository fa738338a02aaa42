#!/bin/sh
# What issue 26 made true stays true: requests are decoded in proto/ only,
# and the bounds that a reader would look for are written in schema.h only.
#
#   tests/check-once.sh SOURCE_ROOT
#
# 1. daemon/dispatch reads no JSON: no proto_get_* call and no cJSON getter
#    or type test (its handlers take the typed params of proto/params.h).
# 2. The one-day wait (86400000), the largest alignment (2097152) and the
#    granule (a GRANULE macro's 256) are literals in proto/schema.h alone
#    among the C sources of the product. The tests may spell them, to check
#    them; so may the public header's documentation, which cannot include
#    schema.h (its words are the user's manual, checked by docs-api).
#
# Exits 0, or 1 naming every line at fault.
set -eu
top=${1:?usage: check-once.sh SOURCE_ROOT}
cd "$top"
bad=0
hits=$(grep -nE 'proto_get_[a-z0-9]+\(|cJSON_Get[A-Za-z]*\(|cJSON_Is[A-Za-z]*\(|->value(string|double|int)' \
	daemon/dispatch/*.c daemon/dispatch/*.h || true)
if [ -n "$hits" ]; then
	echo "check-once: dispatch reads JSON itself (decode it in proto/params.c):"
	echo "$hits"
	bad=1
fi
srcs=$(find common proto daemon client slurm -name '*.[ch]' ! -path proto/schema.h | sort)
# shellcheck disable=SC2086 # one word per file
hits=$(grep -nE '\b(86400000|2097152)\b|GRANULE[^/]*[^0-9]256u?\b' $srcs || true)
if [ -n "$hits" ]; then
	echo "check-once: a bound of schema.h written again (use its macro):"
	echo "$hits"
	bad=1
fi
[ $bad -eq 0 ] && echo "check-once: dispatch reads no JSON; the wait, alignment and granule are schema.h's"
exit $bad
