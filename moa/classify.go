package moa

import (
	"regexp"
	"strings"
)

// ParseSpotter reads a spotter's answer strictly: after trimming blanks,
// quotes and a final period, and dropping a Qwen3 <think> block, it must be
// exactly one category name (any case). Anything else is not trusted.
func ParseSpotter(answer string) (QueryType, bool) {
	s := answer
	if i := strings.Index(s, "</think>"); i >= 0 {
		s = s[i+len("</think>"):]
	}
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, ".")
	s = strings.Trim(s, "\"'`*")
	s = strings.TrimSuffix(s, ".")
	s = strings.ToUpper(strings.TrimSpace(s))
	s = strings.ReplaceAll(s, " ", "_")
	for _, t := range QueryTypes {
		if s == string(t) {
			return t, true
		}
	}
	return "", false
}

// words matches any of the phrases ws as whole words; each may itself be a
// small regular expression.
func words(ws ...string) string { return `\b(` + strings.Join(ws, "|") + `)\b` }

// anyOf matches any of the patterns ps.
func anyOf(ps ...string) string { return `(` + strings.Join(ps, "|") + `)` }

// The rule classifier's signals, compiled once. Each is a family of
// phrasings or a topic vocabulary rather than a list of whole queries.
// They are written in lower case and matched against the lowered query.
var (
	// A request to make a creative artefact: a making or asking verb
	// shortly before the artefact ("write song lyrics", "tell me a story",
	// "I need a toast"), the artefact alone at the start ("A limerick
	// about ..."), a story form or a literary style anywhere, or a
	// role-play/invention opener.
	reCreative = regexp.MustCompile(anyOf(
		words(`write|compose|pen|draft|create|make up|come up with|tell me|give me|generate|need|want|turn|rewrite|rephrase`)+`[^.?!]{0,30}`+
			words(`poems?|odes?|stor(y|ies)|tales?|haikus?|sonnets?|limericks?|lyrics|songs?|raps?|verses?|fables?|fiction|screenplay|scenes?|dialogues?|monologues?|toasts?|speech|eulog(y|ies)|tweets?|captions?|slogans?|taglines?|jokes?|puns?|riddles?|names|titles`),
		`^\s*(an? |some )?(short )?`+words(`poem|story|haiku|sonnet|limerick|song|fable|joke`),
		words(`bedtime stor(y|ies)|short stor(y|ies)|fairy tales?|poetic(ally)?|vivid(ly)?|in the style of|rhym(e|es|ing)`),
		`^\s*`+words(`imagine|pretend|invent|role-?play`),
	))

	// Opinion frames that outweigh any topic: the asker wants a judgement
	// ("should I/we", "do you think", "is X necessary/worth/overrated").
	reOpinionStrong = regexp.MustCompile(anyOf(
		words(`should i|should we|do you think|what do you think|in your (opinion|view)|your (opinion|view|take|favou?rite)`,
			`do you (think|reckon|feel|believe|prefer|like|recommend)|what do you reckon|would you (rather|recommend|pick|choose)|which would you`,
			`which (one )?(is|would be) (better|worse|the best)|overrated|underrated|worth it`),
		`^\s*`+words(`is|are|was|were|isn't|aren't`)+`[^.?!]*`+
			words(`necessary|needed|essential|worth|good|bad|better|worse|best|worst|rude|ethical|unethical|wrong|fair|acceptable|appropriate|okay`,
				`overpriced|a good idea|a waste|dead|dying|the future|here to stay|too|really`),
		words(`best|greatest|worst`)+`[^.?!]*`+words(`ever|of all time`),
	))

	// Trivia about a named thing: who made it, when it happened, what an
	// acronym stands for. Checked before the code vocabulary so that
	// "Who created the Linux kernel?" is a fact, not a programming task.
	reTrivia = regexp.MustCompile(anyOf(
		`^\s*`+words(`who (was|is|were|invented|created|wrote|founded|discovered|designed|painted|built|won|made|developed)`,
			`when (was|were|did)|(in )?(what|which) year`,
			`(what|which) (company|person|country|team|organi[sz]ation|university) (developed|created|invented|made|makes|owns|founded|built|designed)`),
		`\bstands? for\s*\??\s*$`,
	))

	// Programming: code itself and error messages, languages and tools,
	// and the vocabulary of computing concepts: data structures,
	// algorithms, concurrency, distributed systems and their theorems and
	// problems, networking, operating systems.
	reCode = regexp.MustCompile(anyOf(
		"```", `\b\w+\(\)`, `\w\.\w+\(`, `\bfor \w+ in \w+:`, `\b\w*(error|exception):`,
		words(`stack ?trace|segfault|segmentation fault|null pointer|source code|my code|this code|the code|code (snippet|review|that|to|which)`,
			`programming|debug\w*|compil(e|ing|ation)|refactor\w*|(write|implement|define) (a |an )?(\w+ ){0,2}(function|method|class|script|program|query)`),
		words(`python|golang|javascript|typescript|java|rust|kotlin|ruby|php|haskell|scala|c\+\+|c#|bash|powershell|sql|html|css|regex|json|yaml`,
			`in go|go (code|programs?|modules?)|reactjs|react (components?|hooks?|apps?|native)|node\.?js|django|flask|numpy|pandas`,
			`git|github|docker|kubernetes|k8s|npm|pip|webpack|compiler|interpreter|ide|vs ?code|apis?|rest(ful)? api|graphql|websockets?`),
		words(`algorithms?|data structures?|linked lists?|hash (tables?|maps?|functions?)|binary (trees?|search|heaps?)|b-?trees?|priority queues?|tries`,
			`(quick|merge|heap|bubble|insertion) ?sort|sorting|big-?o|time complexity|space complexity|recursion|recursive|pointers?|memory leaks?|garbage collect\w*`,
			`(for|while) loops?|loops?|list comprehensions?|closures?|callbacks?|generics|dependency injection|design patterns?|singletons?|abstract class(es)?|interfaces?|object-oriented|unit tests?`,
			`mutex(es)?|semaphores?|deadlocks?|race conditions?|threads?|multithread\w*|concurrency|async|await|coroutines?|goroutines?`),
		words(`cap theorem|eventual(ly)? consisten\w*|consistency models?|consensus (algorithms?|protocols?)|raft|paxos|(byzantine|two) generals?|byzantine fault\w*`,
			`distributed (systems?|databases?|consensus)|databases?|sharding|replication|load balanc\w*|caching|cache invalidation|microservices?`,
			`tcp|udp|https?|dns|tls|ssl|operating systems?|kernel|syscalls?|virtual machines?`),
	))

	// Mathematics: arithmetic and algebra written out, mathematical verbs
	// and objects, geometry and number theory, probability puzzles and
	// named results (theorems and paradoxes that code did not claim).
	reMath = regexp.MustCompile(anyOf(
		`\d+(\.\d+)?\s*[-+*/^×÷=]\s*\(?-?[\dxyz]`, `\d\s*%`, `\b\d*[xyz]\s*(\^|\*\*)\s*\d`, `\b\d+[xyz]\b`, `[∫√∑π]`,
		words(`solve|prove|proof|derivative|differentiate|integral|integrate|equations?|calculate|compute|simplify|factori[sz]e|sum of|product of`,
			`square root|factorial|logarithm|fractions?|decimal|percent(age)?|average of|mean of|median|expected value|variance|standard deviation|(to the )?power of|squared|cubed|how many ways|in how many ways|(times|twice|half) as (many|much)`,
			`radius|diameter|circumference|hypotenuse|perimeter|triangles?|rectangles?|polygons?|edges|vertices`,
			`least common multiple|lcm|greatest common (divisor|factor)|gcd|divisible|remainder|prime numbers?`),
		words(`probability|odds|dice|die roll|coin (flip|toss)|theorem|lemma|paradox|monty hall|birthday (paradox|problem)|pythagor\w*|bayes\w*|fermat\w*`,
			`goldbach|collatz|riemann|fibonacci|pascal's triangle|pigeonhole|gambler's fallacy|euler\w*|game theory|prisoner's dilemma|nash equilibrium|zero-sum`),
	))
	reNumber    = regexp.MustCompile(`\d+(\.\d+)?`)
	reQuantity  = regexp.MustCompile(`\bhow (many|much|long|far|fast|old)\b`)
	reCondition = regexp.MustCompile(`\b(if|each|per|every|given)\b`)

	// A writing request of any other kind ("Write me a cover letter",
	// "Brainstorm a plot"): after code, so that "Write a SQL query" stays
	// code.
	reWriting = regexp.MustCompile(anyOf(
		`^\s*(please |can you |could you )?`+words(`write|compose|pen|draft|brainstorm|rewrite|rephrase`),
		words(`(love|cover|open) letter|novels?|plots?|picture books?|essays?|ideas for`),
	))

	// Weaker opinion words: after code and math, so that "the best way to
	// sort a list in Python" stays a coding question.
	reOpinionWeak = regexp.MustCompile(words(`better|best|worse|worst|prefer|recommend|pros and cons|agree|disagree|favou?rite`))

	// Open questions that need an argued answer, policy questions
	// ("Should AI be granted ...") included.
	reComplex = regexp.MustCompile(anyOf(`^\s*should\b`,
		words(`why|how (does|do|did|would|might|could|will|can)|explain|compare|contrast|analy[sz]e|evaluate|assess|implications?|trade-?offs?`,
			`design|strategy|plan|causes?|consequences?|effects? of|impacts?|factors|led to|what (would|will|might) happen|what if|difference between`),
	))

	// Short factual questions.
	reFact = regexp.MustCompile(`^\s*` + words(`what|who|when|where|which|is|are|was|were|does|did|how (tall|old|far|big|long|many|much)`))
)

// isWordProblem reports whether q asks for a quantity and gives the numbers
// to work it out from: two of them ("A train travels at 60 mph. How long
// ... 150 miles?"), or one and a condition ("if 10 people each ...").
func isWordProblem(q string) bool {
	if !reQuantity.MatchString(q) {
		return false
	}
	n := len(reNumber.FindAllStringIndex(q, 2))
	return n >= 2 || n == 1 && reCondition.MatchString(q)
}

// ClassifyRules is the rule-based classifier used when no spotter is live
// or its answer does not parse. The first rule that matches decides, and
// the order is from the most telling signal to the least:
//
//  1. Creative: asking for a poem or a story decides the type whatever it
//     is about ("a story about a robot learning to debug its code").
//  2. Strong opinion frames: "should I", "is X worth it/necessary", even
//     when the topic is a language or a number ("Is it worth upgrading
//     from an iPhone 13 to the iPhone 15?").
//  3. Trivia (who/when/what year/stands for): a fact even when it names a
//     programming language or a protocol.
//  4. Code before math: computing has theorems and problems of its own
//     (the CAP theorem, the Byzantine generals problem), and code that
//     computes something is still code.
//  5. Math: expressions, mathematical vocabulary, named puzzles, word
//     problems.
//  6. Any other writing request (write me a letter, brainstorm a plot).
//  7. Weak opinion words (best, prefer, recommend).
//  8. Complex reasoning: why/how/explain/compare and policy questions.
//  9. What is left: short factual questions are SIMPLE_FACT, long
//     requests COMPLEX_REASONING.
func ClassifyRules(query string) QueryType {
	// The signals are written in lower case; lowering the query once is
	// much cheaper than matching every pattern case-insensitively.
	q := strings.ToLower(strings.TrimSpace(query))
	switch {
	case reCreative.MatchString(q):
		return Creative
	case reOpinionStrong.MatchString(q):
		return Opinion
	case reTrivia.MatchString(q) && len(strings.Fields(q)) <= 12:
		return SimpleFact
	case reCode.MatchString(q):
		return Code
	case reMath.MatchString(q), isWordProblem(q):
		return Math
	case reWriting.MatchString(q):
		return Creative
	case reOpinionWeak.MatchString(q):
		return Opinion
	case reComplex.MatchString(q):
		return ComplexReasoning
	case reFact.MatchString(q) && len(strings.Fields(q)) <= 14:
		return SimpleFact
	case len(strings.Fields(q)) <= 6:
		return SimpleFact
	}
	return ComplexReasoning
}
