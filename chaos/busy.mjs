// Another program on the host: keeps one CPU busy for the given share (percent) of each
// 100 ms, until killed. The pressure run's --busy starts it at its first stress.
const share = Number(process.argv[2]);
if (!(share > 0 && share <= 100)) throw new Error(`busy: a share of 1-100 %, not ${process.argv[2]}`);
for (;;) {
  const from = Date.now();
  while (Date.now() - from < share) {
    // busy
  }
  await new Promise((resolve) => setTimeout(resolve, 100 - share));
}
