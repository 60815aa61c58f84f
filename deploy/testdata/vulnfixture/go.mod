// A module that requires golang.org/x/text v0.3.7, vulnerable to GO-2022-1059
// (ParseAcceptLanguage, fixed in 0.3.8): the vulnerability scan's fixture
// (deploy/vulncheck_test.go). reached calls the vulnerable function; unreached
// imports its package and calls none of its vulnerable code.
module example.com/vulnfixture

go 1.22

require golang.org/x/text v0.3.7
