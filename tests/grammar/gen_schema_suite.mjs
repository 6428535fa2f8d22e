// Extracts the JSON Schema Test Suite cases for the keywords rbee's schema
// compiler supports into tests/data/grammar/schema_suite.json (small, checked
// in). Each case keeps the schema and every document as compact JSON text
// (JSON.stringify: members in the order written), so the C test feeds the
// grammar exactly these bytes.
// usage: npm pack json-schema-test-suite@0.0.10 && tar xzf json-schema-test-suite-0.0.10.tgz
//        node tests/grammar/gen_schema_suite.mjs package/tests/draft4 > tests/data/grammar/schema_suite.json
import fs from 'node:fs';
import path from 'node:path';

const dir = process.argv[2];
const files = ['type', 'enum', 'properties', 'required', 'additionalProperties', 'items', 'additionalItems',
  'minItems', 'maxItems', 'minLength', 'maxLength', 'anyOf', 'oneOf', 'allOf', 'definitions', 'ref', 'default',
  'pattern', 'minimum', 'uniqueItems', 'not', 'minProperties'];
const groups = [];
for (const f of files) {
  for (const g of JSON.parse(fs.readFileSync(path.join(dir, `${f}.json`), 'utf8'))) {
    if (JSON.stringify(g.schema).includes('http://')) continue; // remote refs: not in scope
    groups.push({
      file: f, description: g.description, schema: JSON.stringify(g.schema),
      tests: g.tests.map((t) => ({ description: t.description, data: JSON.stringify(t.data), valid: t.valid })),
    });
  }
}
const out = {
  source: 'npm json-schema-test-suite@0.0.10 (JSON Schema Test Suite, draft4), tests/draft4/<file>.json',
  license: 'MIT (Julian Berman)',
  groups,
};
process.stdout.write(JSON.stringify(out, null, 0).replace(/\{"file"/g, '\n{"file"') + '\n');
