# The soak's lost pings and what explains each (scripts/soak.sh):
#
#   awk -v restarts=FILE -v counters=FILE -v t0=EPOCH -f soak-losses.awk A-B.ping...
#
# A ping file is ping -D -O's output from host A to host B (its name says
# which); restarts has a line "killed answering" (epochs) per restart of
# h3; counters has "epoch host name value" lines, every host's counters
# sampled every second or so. A ping is lost when ping reported it
# unanswered and no answer came later. One that falls in h3's restart
# window (from its SIGKILL to 5 s after the new daemon answers) on a path
# to or from h3 is explained by the restart; for any other, the counters
# of either end that count trouble (drops, errors, retransmissions,
# refusals...) and grew between the samples around it are named, the
# most unusual first: growth in that interval against the counter's usual
# growth over as long a time.
BEGIN {
	trouble = "drop|error|fail|timeout|timed_out|retransmit|nak|overrun|_full|busy|stale|rejected|refused|rej_sent|disconnect|restart|reinit|unreachable|evicted|rate_limited|mismatch|malformed|unknown|duplicate|expired|loss"
	while ((getline l < restarts) > 0) {
		split(l, r, " ")
		nr++
		from[nr] = r[1] + 0
		to[nr] = r[2] + 5
	}
	while ((getline l < counters) > 0) {
		split(l, f, " ")
		h = f[2]
		if (f[1] != last[h]) {
			ns[h]++
			st[h, ns[h]] = f[1] + 0
			last[h] = f[1]
		}
		val[h, ns[h], f[3]] = f[4] + 0
		if (f[3] ~ trouble)
			names[h, f[3]] = 1
	}
	# Each trouble counter's growth over the run (a restarted daemon's
	# counters start again from 0).
	for (hn in names) {
		split(hn, p, SUBSEP)
		h = p[1]
		n = p[2]
		g = 0
		have = 0
		for (i = 1; i <= ns[h]; i++) {
			if (!((h, i, n) in val))
				continue
			v = val[h, i, n]
			if (have)
				g += v >= prev ? v - prev : v
			prev = v
			have = 1
		}
		growth[h, n] = g
	}
}

/bytes from/ {
	seq = $0
	sub(/.*icmp_seq=/, "", seq)
	sub(/ .*/, "", seq)
	answered[FILENAME, seq] = 1
}

/no answer yet/ {
	seq = $0
	sub(/.*icmp_seq=/, "", seq)
	sub(/ .*/, "", seq)
	ts = $1
	gsub(/[][]/, "", ts)
	late[FILENAME, seq] = ts + 0
}

/transmitted/ { summary[FILENAME] = $0 }

# The index of host h's last sample at or before t (first: the first).
function before(h, t, i) {
	for (i = ns[h]; i > 1 && st[h, i] > t; i--)
		;
	return i
}

# The index of host h's first sample at or after t (none: the last).
function after(h, t, i) {
	for (i = 1; i < ns[h] && st[h, i] < t; i++)
		;
	return i
}

# The trouble counters of host h that grew around time t, most unusual
# first, at most three, as "h2 name +N (usual M)".
function explain(h, t, i0, i1, hn, p, n, d, span, usual, k, j, out, cnt, best, bi) {
	if (ns[h] < 2)
		return ""
	i0 = before(h, t - 1.5)
	i1 = after(h, t + 1.5)
	span = st[h, ns[h]] - st[h, 1]
	cnt = 0
	for (hn in names) {
		split(hn, p, SUBSEP)
		if (p[1] != h)
			continue
		n = p[2]
		if (!((h, i1, n) in val))
			continue
		d = val[h, i1, n] - ((h, i0, n) in val ? val[h, i0, n] : 0)
		if (d < 0)
			d = val[h, i1, n]
		if (d <= 0)
			continue
		usual = span > 0 ? growth[h, n] * (st[h, i1] - st[h, i0]) / span : 0
		cnt++
		cn[cnt] = n
		cd[cnt] = d
		cu[cnt] = usual
		cs[cnt] = d / (usual + 1)
	}
	out = ""
	for (k = 1; k <= 3 && k <= cnt; k++) {
		best = -1
		for (j = 1; j <= cnt; j++)
			if (!(j in taken) && cs[j] > best) {
				best = cs[j]
				bi = j
			}
		taken[bi] = 1
		out = out sprintf("%s%s %s +%d (usual %.0f)", out == "" ? "" : ", ", h, cn[bi], cd[bi], cu[bi])
	}
	delete taken
	return out
}

END {
	for (key in late) {
		if (key in answered)
			continue
		split(key, p, SUBSEP)
		file = p[1]
		seq = p[2]
		label = file
		sub(/.*\//, "", label)
		sub(/\.ping$/, "", label)
		split(label, ends, "-")
		t = late[key]
		inwin = 0
		for (i = 1; i <= nr; i++)
			if (t >= from[i] && t <= to[i])
				inwin = 1
		if (label ~ /h3/ && inwin) {
			win[label]++
			continue
		}
		out[label]++
		why = explain(ends[1], t)
		w2 = explain(ends[2], t)
		if (w2 != "")
			why = why == "" ? w2 : why "; " w2
		if (why == "") {
			why = "no trouble counter grew at either end"
			unexplained++
		}
		printf "   %s: seq %s lost at %+.1f s: %s\n", label, seq, t - t0, why
	}
	for (file in summary) {
		label = file
		sub(/.*\//, "", label)
		sub(/\.ping$/, "", label)
		printf "%s: %s; lost in restart windows %d, outside them %d\n", label, summary[file], win[label], out[label]
	}
	printf "lost pings no counter explains: %d\n", unexplained
}
