// A small JSON Schema check, for a plan step's arguments as they are typed:
// the keywords tools' input schemas use (type, enum, const, required,
// properties, additionalProperties, items, minLength, maxLength, minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, minItems, maxItems, anyOf,
// oneOf, allOf). Other keywords are not checked here; the server checks a
// plan when it is published.

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  return `a ${typeof value}`;
}

function hasType(value: unknown, type: string): boolean {
  switch (type) {
    case "null":
      return value === null;
    case "boolean":
      return typeof value === "boolean";
    case "number":
      return typeof value === "number";
    case "integer":
      return Number.isInteger(value);
    case "string":
      return typeof value === "string";
    case "array":
      return Array.isArray(value);
    case "object":
      return isObject(value);
    default:
      return true;
  }
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** What in `value` (named `at`) breaks `schema`, one line each; none when it fits. */
export function violations(schema: unknown, value: unknown, at: string): string[] {
  if (schema === false) return [`${at}: nothing is allowed here`];
  if (!isObject(schema)) return [];
  const types = typeof schema.type === "string" ? [schema.type] : Array.isArray(schema.type) ? schema.type : null;
  if (types && !types.some((t) => hasType(value, String(t)))) {
    return [`${at}: expected ${types.join(" or ")}, got ${typeOf(value)}`];
  }
  const found: string[] = [];
  if (Array.isArray(schema.enum) && !schema.enum.some((option) => same(option, value))) {
    found.push(`${at}: one of ${schema.enum.map((o) => JSON.stringify(o as Json)).join(", ")}`);
  }
  if ("const" in schema && !same(schema.const, value)) found.push(`${at}: must be ${JSON.stringify(schema.const)}`);
  if (typeof value === "string") {
    const length = [...value].length;
    if (typeof schema.minLength === "number" && length < schema.minLength) {
      found.push(`${at}: at least ${schema.minLength} character(s)`);
    }
    if (typeof schema.maxLength === "number" && length > schema.maxLength) {
      found.push(`${at}: at most ${schema.maxLength} character(s)`);
    }
  }
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) found.push(`${at}: at least ${schema.minimum}`);
    if (typeof schema.maximum === "number" && value > schema.maximum) found.push(`${at}: at most ${schema.maximum}`);
    if (typeof schema.exclusiveMinimum === "number" && value <= schema.exclusiveMinimum) {
      found.push(`${at}: more than ${schema.exclusiveMinimum}`);
    }
    if (typeof schema.exclusiveMaximum === "number" && value >= schema.exclusiveMaximum) {
      found.push(`${at}: less than ${schema.exclusiveMaximum}`);
    }
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems) {
      found.push(`${at}: at least ${schema.minItems} item(s)`);
    }
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems) {
      found.push(`${at}: at most ${schema.maxItems} item(s)`);
    }
    if ("items" in schema) value.forEach((item, i) => found.push(...violations(schema.items, item, `${at}[${i}]`)));
  }
  if (isObject(value)) {
    const properties = isObject(schema.properties) ? schema.properties : {};
    if (Array.isArray(schema.required)) {
      for (const key of schema.required) if (!(String(key) in value)) found.push(`${at}.${key}: required`);
    }
    for (const [key, item] of Object.entries(value)) {
      if (key in properties) found.push(...violations(properties[key], item, `${at}.${key}`));
      else if (schema.additionalProperties === false) found.push(`${at}.${key}: not an argument of this tool`);
      else if ("additionalProperties" in schema)
        found.push(...violations(schema.additionalProperties, item, `${at}.${key}`));
    }
  }
  if (Array.isArray(schema.allOf)) for (const part of schema.allOf) found.push(...violations(part, value, at));
  for (const keyword of ["anyOf", "oneOf"] as const) {
    const options = schema[keyword];
    if (Array.isArray(options) && options.length && !options.some((o) => violations(o, value, at).length === 0)) {
      found.push(`${at}: matches none of its ${options.length} allowed forms`);
    }
  }
  return found;
}

/** Arguments that fill `schema`'s required properties with empty values of their types. */
export function skeleton(schema: unknown): Record<string, unknown> {
  const args: Record<string, unknown> = {};
  if (!isObject(schema) || !Array.isArray(schema.required)) return args;
  const properties = isObject(schema.properties) ? schema.properties : {};
  for (const key of schema.required.map(String)) {
    const property = properties[key];
    const type = isObject(property) ? (Array.isArray(property.type) ? property.type[0] : property.type) : undefined;
    args[key] =
      type === "string"
        ? ""
        : type === "number" || type === "integer"
          ? 0
          : type === "boolean"
            ? false
            : type === "array"
              ? []
              : type === "object"
                ? {}
                : null;
  }
  return args;
}
