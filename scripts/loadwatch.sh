#!/bin/sh
# Runs a command, then prints the machine's 1-minute, 5-minute and
# 15-minute load averages from before and after it and the highest 1-minute
# load average seen while it ran (sampled every second), as one line that
# scripts/benchload.py reads beside the command's own output:
#
#   # load before 1.20 1.05 0.90 after 1.85 1.30 1.00 max 1.92
#
#   scripts/loadwatch.sh go test -run '^$' -bench . ./model > bin/bench.txt
#
# Exits with the command's status.
set -u
before=$(cut -d' ' -f1-3 /proc/loadavg)
max=$(cut -d' ' -f1 /proc/loadavg)
"$@" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	now=$(cut -d' ' -f1 /proc/loadavg)
	max=$(awk -v a="$max" -v b="$now" 'BEGIN { print (b > a) ? b : a }')
	sleep 1
done
wait "$pid"
status=$?
after=$(cut -d' ' -f1-3 /proc/loadavg)
max=$(awk -v a="$max" -v b="${after%% *}" 'BEGIN { print (b > a) ? b : a }')
echo "# load before $before after $after max $max"
exit "$status"
