#!/usr/bin/env bash
# CPU load as on a busy 2-core CI machine: $LOAD busy loops, and the monitored shell (the one that
# prints the READY lines: the old test's loop or the new one's FIFO reader) reniced to 19 as soon
# as it appears, so it is the process the load slows (as on CI, where it printed too slowly).
pids=()
for i in $(seq 1 "${LOAD:-4}"); do (while :; do :; done) & pids+=($!); done
(while :; do for p in $(pgrep -f 'echo READY|read -r line'); do renice -n 19 -p "$p" >/dev/null 2>&1; done; sleep 0.2; done) & pids+=($!)
"$@"; rc=$?
kill "${pids[@]}"
exit $rc
