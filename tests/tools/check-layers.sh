#!/usr/bin/env bash
# The library's layering, checked: dependencies point one way,
#   ring <- slice <- qp <- ep <- runtime
# (ring/base is the ground under ring).  A file may include headers of its
# own module or of a lower one, never of a higher one; and only
# runtime/ferry.h is public.  Also: no library file over MAX_LINES lines,
# and every acquire or release (ring/base/atomics.h, liburcu's RCU macros)
# says on its line, or the line above, which operation it pairs with.
# Prints every violation; exits 1 if there is one.
#   tests/tools/check-layers.sh [repo root]
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2
MAX_LINES=${MAX_LINES:-800}
rank() {
	case "$1" in
	ring) echo 0 ;; slice) echo 1 ;; qp) echo 2 ;; ep) echo 3 ;; runtime) echo 4 ;;
	*) echo 9 ;;
	esac
}
bad=0
while IFS= read -r f; do
	from=${f%%/*}
	r_from=$(rank "$from")
	while IFS= read -r inc; do
		to=${inc%%/*}
		r_to=$(rank "$to")
		if [ "$r_to" = 9 ]; then
			echo "check-layers: $f includes \"$inc\": not a library path (include from the root: \"qp/nic.h\")"
			bad=1
		elif [ "$r_to" -gt "$r_from" ]; then
			echo "check-layers: $f includes \"$inc\": $from may not depend on $to (ring <- slice <- qp <- ep <- runtime)"
			bad=1
		fi
	done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
	n=$(wc -l < "$f")
	if [ "$n" -gt "$MAX_LINES" ]; then
		echo "check-layers: $f has $n lines (more than $MAX_LINES: split it by idea)"
		bad=1
	fi
done < <(find ring slice qp ep runtime -name '*.[ch]' | sort)
ordering=$(find ring slice qp ep runtime -name '*.[ch]' ! -path ring/base/atomics.h | sort |
	xargs awk '
	/(load_acquire|store_release|_release|_acquire|_acq_rel|rcu_dereference|rcu_assign_pointer)\(/ &&
	!/ferry_tsan_|seg_acquire|seg_release|^#define|^[[:space:]]*\*/ &&
	!/pairs with/ && prev !~ /pairs with/ { print FILENAME ":" FNR ": " $0 }
	{ prev = $0 }')
if [ -n "$ordering" ]; then
	echo "check-layers: an acquire or release without a \"pairs with\" note:"
	echo "$ordering"
	bad=1
fi
if grep -q '#[[:space:]]*include[[:space:]]*"' runtime/ferry.h; then
	echo "check-layers: runtime/ferry.h (public) includes a private header"
	bad=1
fi
[ "$bad" = 0 ] && echo "check-layers: ok (ring <- slice <- qp <- ep <- runtime; files <= $MAX_LINES lines; orderings paired)"
exit $bad
