import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "lua/", "node_modules/"] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Control characters are the ledger's separators (U+001E, U+001F) and what names refuse.
      "no-control-regex": "off",
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true }],
      // A store's methods are async by contract, whether or not a backend awaits in them.
      "@typescript-eslint/require-await": "off",
      // A field taken out of an object by destructuring, to keep the rest, is named `_...`.
      "@typescript-eslint/no-unused-vars": ["error", { varsIgnorePattern: "^_", argsIgnorePattern: "^_", ignoreRestSiblings: true }],
    },
  },
  {
    files: ["**/*.js", "**/*.mjs"],
    extends: [tseslint.configs.disableTypeChecked],
  },
);
