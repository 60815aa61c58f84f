// Command unreached imports the vulnerable package but calls none of its vulnerable
// code: govulncheck reports it and passes.
package main

import (
	"fmt"

	"golang.org/x/text/language"
)

func main() {
	fmt.Println(language.English)
}
